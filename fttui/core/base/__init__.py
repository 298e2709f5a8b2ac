"""What every layer shares: the one error base, the facts defined once (constants), sizes
(units), formatting, paths and secret redaction."""
