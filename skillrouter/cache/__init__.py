"""The stage cache: checksummed entries keyed by what defines them, locks, integrity checks."""
