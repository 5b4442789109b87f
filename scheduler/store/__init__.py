"""The only package that speaks SQL; everything else calls it by intent."""
