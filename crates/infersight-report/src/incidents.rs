//! Incidents: every RCA verdict is stored under `<data>/incidents/` with an id; a person confirms
//! or rejects it (`infersight incidents confirm ID --note …`), and confirmed ones become
//! retrievable past incidents in the knowledge base.
