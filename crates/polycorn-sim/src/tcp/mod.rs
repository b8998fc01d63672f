//! The TCP subflow model.
