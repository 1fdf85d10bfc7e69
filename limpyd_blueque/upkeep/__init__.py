"""Upkeep of the stored data: cleaning what crashed clients left (`cleaning`) and the
retention of finished tasks and stored errors (`retention`). Run by workers and by
operators, on the models.
"""
