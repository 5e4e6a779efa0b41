"""Evaluation: LM scores by position type and the joint bound; BLiMP, SyntaxGym, GLUE (issue 4)."""
