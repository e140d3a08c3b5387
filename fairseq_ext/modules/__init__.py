"""Reusable layers and tensor utilities shared by the model families."""
