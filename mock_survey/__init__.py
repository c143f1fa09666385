"""The embedded mock survey: a deterministic miniature DR10 written in the real data models (sweep
files, the known and hidden lenses' truth) and its mock sky, an image source rendering any coadd
window. Everything downstream reads it through the same readers as real DR10 files."""
