"""Recipes: complete runs assembled from the parts (the main job: base eval -> SFT cold start -> GRPO -> eval)."""
