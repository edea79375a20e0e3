"""fence.v1: the code generated from api/fence/v1/fence.proto (clients/python/generate.sh)."""
