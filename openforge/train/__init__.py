"""Training: GRPO math (:mod:`.grpo`), the built-in CPU trainer (:mod:`.cpu`), SFT from teacher
rollouts (:mod:`.sft`) and the veRL integration (:mod:`.verl`). Torch and veRL are imported lazily
inside the functions that need them."""
