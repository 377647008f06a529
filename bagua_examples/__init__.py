"""The main job's example: a small MLP trained on the 8x8 digits data set that ships with bagua."""
