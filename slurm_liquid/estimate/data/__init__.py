"""Package data of the estimator: models.json (catalogue) and gpus.json (GPU types)."""
