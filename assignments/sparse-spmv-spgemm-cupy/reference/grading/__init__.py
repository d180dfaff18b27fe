"""The grader's adapters (provided: the grader's copy replaces yours). Do not edit."""
