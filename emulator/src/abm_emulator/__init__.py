"""Local emulator of the Account Lists v2 and Export Jobs v1 API."""
