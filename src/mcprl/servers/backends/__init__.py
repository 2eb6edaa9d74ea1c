"""One backend protocol per domain, each with an offline (seeded data) and a live (HTTP API) implementation.

The result models here are what the tools return; both implementations fill the same models.
Live implementations take an `http.ApiClient`, imported only when a live backend is built.
"""
