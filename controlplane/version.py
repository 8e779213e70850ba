"""The platform's version, reported by /info. PEP 440: the Determined client parses it."""

__version__ = "0.38.1"
