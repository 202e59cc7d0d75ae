"""Verify orchestration: the gate API the gates import, the runner, isolated environments, the result cache, JUnit."""
