"""What a run leaves behind: its transcript records (append-only, fingerprinted) and the
case selection they record, which scoring reads back."""
