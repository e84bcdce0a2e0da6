"""The online guillotine 2D cutting-stock example environment."""
