from setuptools import find_packages, setup

setup(
    name="sipe_fairseq",
    version="0.1.0",
    description="Syntax-informed Positional Embeddings (SiPE) as a fairseq plugin",
    packages=find_packages(include=["sipe_fairseq", "sipe_fairseq.*"]),
    python_requires=">=3.10",
    install_requires=["conllu", "sentencepiece", "tqdm"],
    extras_require={"spacy": ["spacy>=3.8,<3.9"], "test": ["pytest", "hypothesis"]},
    entry_points={
        "console_scripts": [
            "sipe-hexatag=sipe_fairseq.cli.hexatag:main",
            "sipe-preprocess=sipe_fairseq.cli.preprocess:main",
            "sipe-eval-lm=sipe_fairseq.cli.eval_lm:main",
            "sipe-glue-preprocess=sipe_fairseq.cli.glue_preprocess:main",
            "sipe-eval=sipe_fairseq.cli.eval:main",
            "sipe-tag=sipe_fairseq.cli.tag:main",
        ]
    },
)
