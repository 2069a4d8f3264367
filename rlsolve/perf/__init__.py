"""The performance model: time and memory of each phase of an RL step."""
