"""`orchard train`: trajectories -> SFT samples -> a fine-tuned checkpoint.

- `episodes`: read trajectory files, filter (resolved only, suite, harness, teacher), drop
  duplicates, and turn each episode into its turns (the prompt a model saw, the answer it gave).
- `samples`: turns -> token ids + labels (loss on assistant tokens only), per call or merged.
- `vision`: the samples' Encoder for a vision-language base (chat template with images, pixel
  values per micro-batch); docs/vision.md.
- `model_loading`: a hub id, a checkpoint folder or `smollm2` -> (model, tokenizer[, processor]).
- `trainer`: the plain PyTorch loop (full or LoRA, bf16 autocast, packing, checkpoints, resume).
- `report`: the training log, the loss curve and the model card.

torch and transformers are imported inside functions only: `orchard --help` never loads them.
"""
