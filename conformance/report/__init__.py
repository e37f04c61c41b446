"""What a run leaves: the records of its tests, the verdict matrix, defect entries, and the report's renderers (terminal, Markdown, HTML, results pages)."""
