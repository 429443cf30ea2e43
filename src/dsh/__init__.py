"""dsh: an agent harness whose history is an append-only, durable event log."""
