"""receipts"""
