"""The Streamlit dashboard (`wap dashboard`): app.py renders what wapflow.service.dashboard returns."""
