"""How to plug into other frameworks: TRL's GRPOTrainer (``trl``) and Ray actors (``ray``)."""
