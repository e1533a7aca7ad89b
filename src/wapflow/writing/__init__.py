"""Write: read the landed files and append them to the run's branch only."""
