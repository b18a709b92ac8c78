"""After training: model cards, curves, evaluation of saved models, loading policies, pushing to the Hub."""
