"""Draft canaries: the decision from both arms' counters (decision.py), the phase and what each
arm's workload is (phase.py, arms.py). Pure: the controller feeds it what it read."""
