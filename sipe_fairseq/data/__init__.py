"""Data side of sipe_fairseq: tag dictionaries, CoNLL-U preprocessing, aligned tag streams."""
