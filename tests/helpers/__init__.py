"""Test helpers: archive builders, injected faults, archive bombs, and the one scan-and-wait flow."""
