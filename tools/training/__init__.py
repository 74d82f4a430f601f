"""Training draft heads: self-distillation data, the EAGLE-3 objective, evaluation."""
