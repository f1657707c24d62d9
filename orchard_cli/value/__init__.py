"""The value model: graded experience distilled into a scorer, and best-of-N reranking with it.

Modules: data (episodes from trajectories files and eval runs; labels; the text under a token
budget; splits by task), actions (what an episode without a patch did, claw's: tool calls,
answer, state changes, as text and as features), features (what the frozen base LM reads from an
episode), model (the scalar head, the model folder), metrics (AUC, calibration, best-of-N
strategies), train (`orchard rerank train`), apply (`orchard rerank apply`, `orchard eval
--rerank`), card (the model card), variants and candidates_io (`orchard rerank candidates`: gold,
near misses, unrelated edits and empty patches of tasks with a gold patch, to grade as experience).
torch and transformers are imported only inside the functions that read with the LM.
"""
