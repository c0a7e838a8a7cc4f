"""orchestrate"""
