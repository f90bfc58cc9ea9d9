"""What every layer of the provider shares and none owns: where files go, and how paths are read."""
