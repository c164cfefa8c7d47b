"""What runs the loop: the run's config, task order, the update, checkpoints, the sync and async trainers."""
