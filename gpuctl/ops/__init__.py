"""Operations: apply and plan from one step list, MIG, validation, status, render, tenancy."""
