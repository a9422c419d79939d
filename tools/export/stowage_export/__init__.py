"""Export PyTorch modules to Stowage bundles: see export_bundle and docs/export.md."""
from .bundle import DriftError, Exported, ExportError, Worst, export_bundle

__all__ = ["export_bundle", "Exported", "ExportError", "DriftError", "Worst"]
