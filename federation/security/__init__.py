"""Who may call: bearer tokens and OIDC for users and tenants, certificates for the agents' mTLS."""
