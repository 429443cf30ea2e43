"""What every test folder shares: the one controllable clock (:mod:`.clock`), the one rig builder
(:mod:`.rig`) and the waits that return as soon as a condition holds (:mod:`.wait`)."""
