"""The validating webhook and the certificate it serves with."""
