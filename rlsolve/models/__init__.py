"""Model architecture catalog (YAML data) and arithmetic."""
from rlsolve.models.arch import Architecture
from rlsolve.models.catalog import find_model, list_models, resolve_model

__all__ = ["Architecture", "find_model", "list_models", "resolve_model"]
