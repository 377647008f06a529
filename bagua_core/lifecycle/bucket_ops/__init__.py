"""Operations a bucket runs on its data (each a callable taking the bucket)."""
