"""Training: pairs, hard negatives, the false-negative filter, losses, the loop, the encoder and reranker trainers."""
