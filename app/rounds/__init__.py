"""Live interview rounds: what the interviewer's console holds beside the candidate's read."""
