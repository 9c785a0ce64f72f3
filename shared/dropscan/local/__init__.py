"""The local stack: template.yaml deployed into moto, with a dispatcher playing Lambda's event sources."""
