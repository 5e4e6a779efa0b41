"""Command-line tools of sipe_fairseq."""
