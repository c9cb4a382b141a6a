"""Default models and the data they are trained on (the application layer)."""
