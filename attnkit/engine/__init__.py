"""The judging engine: an assignment's manifest (config), the course's plug-ins (registry, plugin), the judge
that runs one submission through isolation and its checks, their results, and the diagnosis of a mistake."""
