"""The value model: graded experience distilled into a scorer, and best-of-N reranking with it."""
