"""Ready-made networks for the custom model composer."""
