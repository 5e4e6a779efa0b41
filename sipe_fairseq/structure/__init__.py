"""Structure chosen from the prefix, for scoring and generation, for every model family.

* :mod:`.sources`: the ``--tags`` grammar (``given``, ``self``, ``beam:K``);
* :mod:`.sentences`: a sentence as the engine reads it (targets, word starts, given structure);
* :mod:`.family`: which structure a model reads, and its policy (the one family decision);
* :mod:`.policy`, :mod:`.hexatags`, :mod:`.arcs`: the policy protocol and its two implementations;
* :mod:`.search`: the batched word-synchronous search (given = the forced path, self = greedy,
  beam:K); :mod:`.scoring`: sentences in, :class:`~.record.SentenceScore` out;
* :mod:`.generation`: fairseq's generator over a model that chooses its structure as it goes.
"""
