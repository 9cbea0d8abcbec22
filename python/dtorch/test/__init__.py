"""Helpers for testing code written with dtorch (see ``dtorch.test.test_util``)."""
