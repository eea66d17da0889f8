//! pagoda's own routes for the models it serves: load one now, or unload one
//! (`POST /models/load`, `POST /models/unload`), for the admin key when keys are set.

pub mod models;
