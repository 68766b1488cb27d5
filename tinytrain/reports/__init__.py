"""5. What a build reports: report.json and its summary, memory.json, the layer table, the plot."""
