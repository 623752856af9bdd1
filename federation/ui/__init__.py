"""The read-only web dashboard (`federation-server --ui-listen`)."""
